// Typesets the formulas that pymdownx.arithmatex (generic mode) leaves in the page with the bundled KaTeX:
// inline <span class="arithmatex">\(...\)</span> and display <div class="arithmatex">\[...\]</div>.
// No network: katex.min.js and its fonts are in javascripts/katex/ (see its LICENSE).
(function () {
  function typeset(root) {
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      var tex = el.textContent.trim();
      var display = el.tagName === "DIV";
      tex = tex.replace(/^\\[\(\[]/, "").replace(/\\[\)\]]$/, "");
      try {
        katex.render(tex, el, {displayMode: display, throwOnError: false});
      } catch (err) {
        console.error("KaTeX: " + err);
      }
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { typeset(document); });
  } else {
    document.addEventListener("DOMContentLoaded", function () { typeset(document); });
  }
})();
