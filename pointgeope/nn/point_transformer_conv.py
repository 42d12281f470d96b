"""``GeoPEPointTransformerConv``: PyG's Point Transformer layer with GeoPE (or a baseline) as its
positional encoding."""
from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import Tensor
from torch_geometric.nn import PointTransformerConv
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.typing import Adj, OptTensor, PairTensor, SparseTensor, torch_sparse
from torch_geometric.utils import add_self_loops, remove_self_loops, softmax

from pointgeope.geope import apply_geope, relative_geope
from pointgeope.model.ape import absolute_features
from pointgeope.model.attention import MixedInit, PositionalEncoding, pair_frequencies, position_scales
from pointgeope.model.ops.checks import check_model_dtype
from pointgeope.model.rope import grid_coordinates, pair_angles, rotate_pairs
from pointgeope.model.rotation import geometry_dtype
from pointgeope.nn import target_frame
from pointgeope.nn.checks import check_finite, check_float_tensor, check_positions
from pointgeope.nn.conv_options import check_options, check_read, preset_name
from pointgeope.nn.saved_encoding import encoding_text, load_encoding
from pointgeope.nn.target_frame import target_coefficients, turn_into_targets

__all__ = ["GeoPEPointTransformerConv"]


class GeoPEPointTransformerConv(PointTransformerConv):
    r"""The Point Transformer layer from the `"Point Transformer" <https://arxiv.org/abs/2012.09164>`_
    paper with the positional encoding of `"GeoPE: A Unified Geometric Positional Embedding for Structured
    Tensors" <https://arxiv.org/abs/2512.04963>`_ or one of its baselines, as a drop-in
    :class:`torch_geometric.nn.PointTransformerConv`:

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i) \cup \{ i \}} \alpha_{i,j} \, \mathbf{v}_{i,j},
        \qquad \alpha_{i,j} = \textrm{softmax} \left( \gamma_\mathbf{\Theta}(\mathbf{r}_{i,j}) \right),
        \qquad \delta_{i,j} = h_\mathbf{\Theta}(\mathbf{p}_i - \mathbf{p}_j).

    With ``pe="rpe"`` this *is* PyG's layer (same parameters, same outputs):
    :math:`\mathbf{r}_{i,j} = \mathbf{W}_1 \mathbf{x}_i - \mathbf{W}_2 \mathbf{x}_j + \delta_{i,j}` and
    :math:`\mathbf{v}_{i,j} = \mathbf{W}_3 \mathbf{x}_j + \delta_{i,j}`. The other presets are those of
    ``pointgeope.model`` (``docs/GEOPE_SPEC.md`` section 4) in PyG's sign convention; the key is taken into
    the frame of the query, per block of three channels (GeoPE) or per channel pair (RoPE):

    * ``"geope"``: :math:`\mathbf{r}_{i,j} = \mathbf{W}_1 \mathbf{x}_i - \mathbf{R}(t_i)^{\top}
      \mathbf{R}(t_j) \mathbf{W}_2 \mathbf{x}_j`, with :math:`\mathbf{R}(t)` GeoPE's quaternion rotation of
      the phases :math:`t_b = s \, \omega_b \, \mathbf{p}`, :math:`\omega_b = \lambda^{-2b/(3n)}`
      (:math:`s` = ``pos_scale``, :math:`\lambda` = ``base``; :obj:`pointgeope.geope`)
    * ``"lingeope"``: :math:`\mathbf{W}_1 \mathbf{x}_i - \mathbf{R}(t_j - t_i) \mathbf{W}_2 \mathbf{x}_j`
      (translation invariant)
    * ``"rope3d"``: :math:`\mathbf{W}_1 \mathbf{x}_i - \mathbf{R}_{2D}(\theta(\mathbf{p}_j - \mathbf{p}_i))
      \mathbf{W}_2 \mathbf{x}_j`, channel pair :math:`p` turned by :math:`\theta_p(\mathbf{d}) =
      \mathbf{f}_p \cdot \mathbf{d}`, one axis per pair at GeoPE's frequencies
    * ``"pointrope"``: the same on the integer cells :math:`\lfloor \mathbf{p} / u \rfloor` of
      ``grid_unit`` :math:`u`, with PointROPE's frequencies (LitePT); ``"rope-mixed"``: learnt
      :math:`\mathbf{f}_p` (RoPE-Mixed)
    * ``"ape"``: :math:`(\mathbf{W}_1 \mathbf{x}_i + \mathbf{e}(\mathbf{p}_i)) - (\mathbf{W}_2 \mathbf{x}_j
      + \mathbf{e}(\mathbf{p}_j))`, sinusoids :math:`\mathbf{e}` at rope3d's frequencies
    * ``"geope+rpe"``, ``"lingeope+rpe"``, ``"rope3d+rpe"``: the rotation and :math:`+ \delta_{i,j}`
    * ``"none"``: :math:`\mathbf{W}_1 \mathbf{x}_i - \mathbf{W}_2 \mathbf{x}_j`, and
      :math:`\mathbf{v}_{i,j} = \mathbf{W}_3 \mathbf{x}_j` (no :math:`h_\mathbf{\Theta}`)

    Every preset but ``"none"`` keeps :math:`\mathbf{v}_{i,j} = \mathbf{W}_3 \mathbf{x}_j + \delta_{i,j}`;
    a :class:`pointgeope.model.PositionalEncoding` with ``value="geope"`` turns :math:`\mathbf{W}_3
    \mathbf{x}_j` as the key instead. Channels past the last full block (pair) pass through unrotated.

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1` to derive it from the first
            input(s); a tuple gives the sizes of source and target.
        out_channels (int): Size of each output sample, the width that is rotated.
        pos_nn (torch.nn.Module, optional): :math:`h_\mathbf{\Theta}`, mapping :obj:`pos_i - pos_j`
            :obj:`[-1, axes]` to :obj:`[-1, out_channels]` (default: a linear map). Not allowed with ``"none"``.
        attn_nn (torch.nn.Module, optional): :math:`\gamma_\mathbf{\Theta}` (default: :obj:`None`).
        add_self_loops (bool, optional): Replace the graph's self-loops by one per node. (default: :obj:`True`)
        pe (str or PositionalEncoding, optional): A key of :obj:`pointgeope.model.PRESETS`. (default: ``"rpe"``)
        pos_scale (float, optional): Phase per unit of position at block 0, :math:`s`: :obj:`1 / voxel_size`
            puts positions in voxel units (default: :obj:`25.0`, metres at 4 cm voxels).
        base (float, optional): Frequency base :math:`\lambda`. (default: :obj:`100.0`)
        axes (int, optional): Position axes :math:`A` (1, 2 or 3; RoPE presets and ``"ape"``: 3).
            (default: :obj:`3`)
        learnable (bool, optional): Learn GeoPE's block frequencies. (default: :obj:`False`)
        grid_unit (float, optional): PointROPE's cell size, needed by ``"pointrope"``. (default: :obj:`None`)
        mixed_init (str, optional): RoPE-Mixed's initial frequencies, ``"random"`` or ``"axial"``.
            ``pos_scale``, ``base``, ``learnable``, ``grid_unit`` and ``mixed_init`` set away from their defaults
            with a ``pe`` that does not read them (:obj:`pointgeope.model.attention.options_read`: ``"rpe"`` and
            ``"none"`` read none, ``"pointrope"`` only ``grid_unit``, RoPE-Mixed never ``learnable``) are refused.
        **kwargs (optional): Additional arguments of :class:`torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` or :math:`((|\mathcal{V_s}|, F_{s}),
          (|\mathcal{V_t}|, F_{t}))` if bipartite, positions :math:`(|\mathcal{V}|, A)` or
          :math:`((|\mathcal{V_s}|, A), (|\mathcal{V_t}|, A))` if bipartite, edge indices :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})` or :math:`(|\mathcal{V}_t|, F_{out})`
          if bipartite
    """

    def __init__(self, in_channels: int | tuple[int, int], out_channels: int, pos_nn: Callable | None = None,
                 attn_nn: Callable | None = None, add_self_loops: bool = True, pe: str | PositionalEncoding = "rpe",
                 pos_scale: float = 25.0, base: float = 100.0, axes: int = 3, learnable: bool = False,
                 grid_unit: float | None = None, mixed_init: MixedInit = "random", **kwargs):
        encoding = PositionalEncoding.preset(pe)
        out_channels, pos_scale, base, axes, grid_unit = check_options(encoding, in_channels, out_channels, pos_nn,
                                                                         pos_scale, base, axes, grid_unit)
        check_read(encoding, _DEFAULTS, pos_scale=pos_scale, base=base, learnable=learnable, grid_unit=grid_unit,
                   mixed_init=mixed_init)
        if pos_nn is None and encoding.needs_delta and axes != 3:
            pos_nn = Linear(axes, out_channels)
        super().__init__(in_channels, out_channels, pos_nn, attn_nn, add_self_loops, **kwargs)
        self._pyg_kwargs = dict(kwargs)
        if not encoding.needs_delta:                                 # "none": no delta_ij, no h_Theta, and no
            del self._modules["pos_nn"]                              # submodule slot: a state_dict's pos_nn.*
            self.pos_nn = None                                       # keys are unexpected (strict load refuses)
        self.pe = encoding
        self.pe_name = preset_name(encoding)
        self.pos_scale, self.base, self.axes, self.learnable = pos_scale, base, axes, learnable
        self.grid_unit, self.mixed_init = grid_unit, mixed_init
        self.block_scale, self.pair_freq = position_scales(encoding, out_channels, base, pos_scale, learnable,
                                                           mixed_init, axes)

    def reset_parameters(self):
        super().reset_parameters()
        if getattr(self, "pe", None) is None:                        # PyG's __init__ calls this before ours
            return
        scale, pair_freq = position_scales(self.pe, self.out_channels, self.base, self.pos_scale, self.learnable,
                                           self.mixed_init, self.axes)
        if self.pair_freq is not None:                               # RoPE-Mixed's draw (or rope3d's values)
            self.pair_freq.data.copy_(pair_freq.data)
        if self.block_scale is not None and self.block_scale.freq is not None:
            self.block_scale.freq.data.copy_(scale.freq.data)

    def forward(self, x: Tensor | PairTensor, pos: Tensor | PairTensor, edge_index: Adj) -> Tensor:
        r"""PyG's `forward`, with whatever depends on one node done once per node: standard GeoPE turns the
        sources' keys `W_2 x_j (N_s, C)` (and values `W_3 x_j` with `value="geope"`) by $R(t_j)$ here, the
        coefficients of the targets' $R(t_i)^\top$ are computed once a target
        (`pointgeope/nn/target_frame.py`), and APE's sinusoids are added to queries and keys per
        node. Only what depends on both ends of an edge (the multiply-adds of $R(t_i)^\top$, linear GeoPE's and
        RoPE's relative rotations) is done per edge, in `message`."""
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        pos = (pos, pos) if isinstance(pos, Tensor) else _position_pair(pos)
        self._check_positions(pos, (x_src, x_dst))
        key = self._in_source_frame(self.lin_src(x_src), pos[0], self.pe.rotation)
        value = self._in_source_frame(self.lin(x_src), pos[0], self.pe.value_rotation)
        query = self.lin_dst(x_dst)                                  # PyG's order: the same gradient sums
        if self.pe.absolute:                                         # W_1 x_i + e(p_i), W_2 x_j + e(p_j)
            freq = pair_frequencies(self.pe, self.out_channels, self.block_scale, self.pair_freq, query)
            query = query + absolute_features(pos[1], freq, self.out_channels, query.dtype)
            key = key + absolute_features(pos[0], freq, self.out_channels, key.dtype)
        turn, key_nodes, value_nodes = self._target_coefficients(pos[1], key), None, None
        if turn is not None or self._turned_by_numba(key, pos):     # gathered and turned in one pass in message
            if self.pe.rotation in _NODE_TURNS:
                key, key_nodes = None, key
            if self.pe.value_rotation in _NODE_TURNS:
                value, value_nodes = None, value
        if self.add_self_loops:                                      # PyG's: the graph's own removed, one a node
            if isinstance(edge_index, Tensor):                       # (inline as PyG's, not a helper: a helper's
                _check_edge_index(edge_index)                        # (shape only; PyG's own check comes later)
                num_nodes = min(pos[0].size(0), pos[1].size(0))      # data-dependent nonzero is a second graph
                edge_index, _ = remove_self_loops(edge_index)        # break under torch.compile)
                edge_index, _ = add_self_loops(edge_index, num_nodes=num_nodes)
            elif isinstance(edge_index, SparseTensor):
                edge_index = torch_sparse.set_diag(edge_index)
        # PyG reads the next comment as one line (its TorchScript types of propagate's arguments)
        # propagate_type: (x: Tuple[Optional[Tensor], Tensor], pos: PairTensor, alpha: Tuple[Optional[Tensor], Tensor], key_nodes: Optional[Tensor], value_nodes: Optional[Tensor], turn: Optional[Tensor])  # noqa: E501
        return self.propagate(edge_index, x=(value, x_dst), pos=pos, alpha=(key, query), key_nodes=key_nodes,
                              value_nodes=value_nodes, turn=turn)

    def message(self, x_j: OptTensor, pos_i: Tensor, pos_j: Tensor, alpha_i: Tensor, alpha_j: OptTensor,
                key_nodes: OptTensor, value_nodes: OptTensor,
                turn: OptTensor, edge_index_j: Tensor, index: Tensor, ptr: OptTensor, size_i: int | None) -> Tensor:
        delta = None if self.pos_nn is None else self.pos_nn(pos_i - pos_j)
        if key_nodes is not None:                                    # gathered and turned in one pass
            key = self._turn_on_edges(key_nodes, self.pe.rotation, turn, pos_i, pos_j, edge_index_j, index)
        else:
            key = self._in_query_frame(alpha_j, pos_i, pos_j, self.pe.rotation)
        alpha = alpha_i - key
        if self.pe.relation_delta:
            alpha = alpha + delta
        if self.attn_nn is not None:
            alpha = self.attn_nn(alpha)
        alpha = softmax(alpha, index, ptr, size_i)
        if self.pe.value == "rpe":
            return alpha * (x_j + delta)
        if value_nodes is not None:                                  # the values, as the keys
            return alpha * self._turn_on_edges(value_nodes, self.pe.value_rotation, turn, pos_i, pos_j, edge_index_j,
                                               index)
        if self.pe.value == "geope":                                 # the relation's kind of rotation
            return alpha * self._in_query_frame(x_j, pos_i, pos_j, self.pe.value_rotation)
        return alpha * x_j

    def _target_coefficients(self, pos: Tensor, key: Tensor) -> OptTensor:
        r"""Standard GeoPE's per-target coefficients of $R(t_i)^\top$ `(N_t, 3n + 3)` (for keys or values) when
        the positions and frequencies need no gradient (the fast path of `message`); `None` otherwise (the
        rotation is then differentiated through `apply_geope` per edge)."""
        if "geope" not in (self.pe.rotation, self.pe.value_rotation):
            return None
        scale = self.block_scale(geometry_dtype(key.dtype), key.device)
        if torch.is_grad_enabled() and (pos.requires_grad or scale.requires_grad):
            return None
        return target_coefficients(pos.to(scale.dtype), scale)

    def _turned_by_numba(self, key: Tensor, pos: PairTensor) -> bool:
        """Whether linear GeoPE's and RoPE's per-edge rotations run as one compiled pass over the edges
        (`turn_edges` of `pointgeope/nn/frame_numba.py`): on the CPU backend of `target_frame`
        (float32/float64, numba installed), with positions and frequencies as data (no gradient)."""
        edge_turns = {self.pe.rotation, self.pe.value_rotation} & set(_EDGE_TURNS)
        if not edge_turns or target_frame.frame_backend(key) != "numba":
            return False
        block_freq = None if self.block_scale is None else self.block_scale.freq
        tensors = [t for t in (*pos, self.pair_freq, block_freq) if t is not None]
        return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))

    def _turn_on_edges(self, nodes: Tensor, rotation: str, turn: OptTensor, pos_i: Tensor, pos_j: Tensor,
                       src: Tensor, dst: Tensor) -> Tensor:
        r"""The sources' keys (or values) `nodes (N_s, C)` gathered along the edges and turned into their targets'
        frames in one pass: standard GeoPE by the targets' $R(t_i)^\top$ (`turn`: their coefficients), linear
        GeoPE by $R(t_j - t_i)$ and RoPE by its pair angles of `p_j - p_i`, from per-edge coefficients."""
        if rotation == "geope":
            return turn_into_targets(nodes, turn, src, dst)
        from pointgeope.nn.frame_numba import turn_edges
        work = geometry_dtype(nodes.dtype)
        if rotation == "lingeope":                                   # target_coefficients: no gradient
            coef = target_coefficients((pos_j - pos_i).to(work), self.block_scale(work, nodes.device))
            return turn_edges(nodes, coef, src, torch.arange(src.shape[0], device=src.device), 1.0, False)
        with torch.no_grad():
            if rotation == "pointrope":
                disp = grid_coordinates(pos_j, self.grid_unit, work) - grid_coordinates(pos_i, self.grid_unit, work)
            else:
                disp = (pos_j - pos_i).to(work)
            theta = pair_angles(disp, pair_frequencies(self.pe, self.out_channels, self.block_scale,
                                                       self.pair_freq, nodes).to(work))
            cos_sin = torch.cat([theta.cos(), theta.sin()], dim=-1)
        return turn_edges(nodes, cos_sin, src, torch.arange(src.shape[0], device=src.device), 1.0, True)

    def _check_positions(self, pos: PairTensor, x: PairTensor) -> None:
        """Floating-point finite positions, one a node (a row of `x`), of `axes` columns where they enter other
        than through `pos_nn` (with `rpe` only `pos_nn` reads them: their width is PyG's rule, what it takes);
        those turned or encoded within `+-2^60` as every point op's (`check_positions`: beyond ~1.8e19 a rotation's
        axis norm overflows float32 and would give NaN; standard GeoPE's phases beyond float32's reach are said)."""
        pair = pos[0] is not pos[1] or x[0] is not x[1]
        names = (("pos[0] (sources)", "x[0]"), ("pos[1] (targets)", "x[1]")) if pair else (("pos", "x"),)
        for (name, x_name), p, rows in zip(names, pos, x, strict=False):
            check_float_tensor(name, p)
            if p.dim() != 2 or (self.pe.uses_positions and p.shape[-1] != self.axes):
                width = self.axes if self.pe.uses_positions else "A"
                raise ValueError(f"expected {name} of shape (N, {width}), got {tuple(p.shape)}")
            if rows is not None and rows.shape[0] != p.shape[0]:
                raise ValueError(f"expected {x_name} and {name} with one row a node, got {x_name} of "
                                 f"{rows.shape[0]} rows and {name} of {p.shape[0]}")
            self._check_dtypes(name, p, x_name, rows)
            turned = "geope" in (self.pe.rotation, self.pe.value_rotation)   # absolute phases: said beyond float32
            (check_positions(name, p, self.block_scale(torch.float32, p.device) if turned else 0.0)
             if self.pe.uses_positions else check_finite(name, p))

    def _check_dtypes(self, name: str, pos: Tensor, x_name: str, rows: OptTensor) -> None:
        """Features in the layer's dtype, and positions too where they enter a linear `pos_nn` (the default): torch's
        "mat1 and mat2 must have the same dtype" named neither (`check_model_dtype`: autocast's casts are taken)."""
        weight = self.lin.weight             # in_channels=-1: uninitialised until the first call, in this dtype
        if rows is not None:
            check_model_dtype(x_name, rows, weight.dtype)
        if isinstance(self.pos_nn, (Linear, torch.nn.Linear)):
            check_model_dtype(name, pos, weight.dtype)

    def _in_source_frame(self, x: Tensor, pos: Tensor, rotation: str | None) -> Tensor:
        """``R(t_j) x_j`` of every source node, ``x (N_s, C)``, ``pos (N_s, A)``, for standard GeoPE (the half
        of ``R(t_i)^T R(t_j)`` that depends on the source only); ``x`` itself for the other rotations."""
        if rotation != "geope":
            return x
        return apply_geope(x, pos, self.block_scale(geometry_dtype(x.dtype), x.device))

    def _in_query_frame(self, x_j: Tensor, pos_i: Tensor, pos_j: Tensor, rotation: str) -> Tensor:
        """The edges' source features ``x_j (E, C)`` turned into the frame of their targets (``rotation``).
        Standard GeoPE's ``x_j`` arrive as ``R(t_j) x_j`` (``_in_source_frame``): only ``R(t_i)^T`` is left."""
        if rotation == "none":
            return x_j
        if rotation in ("geope", "lingeope"):
            scale = self.block_scale(geometry_dtype(x_j.dtype), x_j.device)
            if rotation == "lingeope":                               # R(t_j - t_i) x_j
                return relative_geope(x_j, pos_i, pos_j, scale, linear=True)
            return apply_geope(x_j, pos_i, scale, inverse=True)
        if rotation == "pointrope":                                  # integer cells of the grid unit
            work = geometry_dtype(x_j.dtype)
            disp = grid_coordinates(pos_j, self.grid_unit, work) - grid_coordinates(pos_i, self.grid_unit, work)
        else:
            disp = pos_j - pos_i
        freq = pair_frequencies(self.pe, self.out_channels, self.block_scale, self.pair_freq, x_j)
        return rotate_pairs(x_j, disp, freq)

    def settings(self) -> dict[str, float]:
        """The settings besides the parameters that this layer's outputs depend on: `pos_scale` and `base`
        where GeoPE's frequencies turn keys or values or make APE's sinusoids, `grid_unit` for PointROPE. They
        are in `repr` and in the `state_dict` (as float64 scalars), and a `state_dict` of other values (or
        without them) refuses to load; `"rpe"` and `"none"` have none, so PyG's `state_dict` loads as it is."""
        rotations = {self.pe.rotation, self.pe.value_rotation}
        out = {}
        if rotations & {"geope", "lingeope", "rope3d"} or self.pe.absolute:
            out.update(pos_scale=self.pos_scale, base=self.base)
        if "pointrope" in rotations:
            out["grid_unit"] = self.grid_unit
        return out

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, value in self.settings().items():
            destination[prefix + name] = torch.tensor(value, dtype=torch.float64)
        if self.settings():    # and the encoding, its settings as JSON bytes (rpe's and none's state_dict stays PyG's)
            destination[prefix + "pe"] = torch.tensor(list(encoding_text(self.pe).encode()), dtype=torch.uint8)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """Compare the saved settings and encoding with this layer's (a difference is an error, strict or not; a
        checkpoint from before the encoding was saved has none, and loads with a warning naming the assumption:
        ``saved_encoding.load_encoding``), then load the parameters as PyG does."""
        settings = self.settings()
        for name in _SETTINGS:
            key = prefix + name
            if name not in settings:
                if key in state_dict:                                # a setting this encoding does not use
                    state_dict.pop(key)
                    unexpected_keys.append(key)
                continue
            if key not in state_dict:
                missing_keys.append(key)
                continue
            saved = float(state_dict.pop(key))
            if saved != settings[name]:
                error_msgs.append(f"{key}: the checkpoint was saved with {name}={saved!r}, this layer has "
                                  f"{name}={settings[name]!r}; build it with {name}={saved!r} to load it")
        load_encoding(state_dict.pop(prefix + "pe", None), self.pe, prefix, settings, missing_keys, unexpected_keys,
                      error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def __prepare_scriptable__(self) -> PointTransformerConv:
        """TorchScript: `"rpe"` is PyG's layer, `"none"` PyG's with a zero `delta_ij`; both script as
        `PointTransformerConv` sharing this layer's modules. The other encodings turn features with autograd
        Functions, which TorchScript cannot compile: they raise here."""
        if self.pe_name not in ("rpe", "none"):
            raise NotImplementedError(f"TorchScript is supported for pe='rpe' and pe='none' only (as PyG's "
                                      f"PointTransformerConv), got pe={self.pe_name!r}: use torch.compile or eager")
        pos_nn = _ZeroDelta(self.out_channels) if self.pos_nn is None else self.pos_nn
        layer = PointTransformerConv(self.in_channels, self.out_channels, pos_nn, self.attn_nn, self.add_self_loops,
                                     **self._pyg_kwargs)
        layer.lin, layer.lin_src, layer.lin_dst = self.lin, self.lin_src, self.lin_dst
        return layer.train(self.training)

    def __repr__(self) -> str:
        extra = [f"{name}={value}" for name, value in self.settings().items()]
        extra += ["learnable=True"] * self.learnable + [f"axes={self.axes}"] * (self.axes != 3)
        options = ", ".join([f"pe={self.pe_name!r}", *extra])
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, {options})"


_SETTINGS = ("pos_scale", "base", "grid_unit")
# The defaults of the options check_read compares with (conv_options.check_read), read from the signature.
_DEFAULTS = {name: arg.default for name, arg in inspect.signature(GeoPEPointTransformerConv).parameters.items()
             if name in ("pos_scale", "base", "learnable", "grid_unit", "mixed_init")}
_EDGE_TURNS = ("lingeope", "rope3d", "pointrope", "rope-mixed")   # rotations of both ends: per-edge coefficients
_NODE_TURNS = ("geope", *_EDGE_TURNS)                              # rotations `_turn_on_edges` gathers itself


class _ZeroDelta(torch.nn.Module):
    """`delta_ij = 0` of `out_channels` (`pe="none"` as PyG's layer, for TorchScript)."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels

    def forward(self, diff: Tensor) -> Tensor:
        return diff.new_zeros(diff.shape[0], self.channels)


def _check_edge_index(edge_index: Tensor) -> None:
    """`(2, E)` (a dense one), as PyG's `MessagePassing` checks it in `propagate`: the self-loops' handling failed
    before it on another shape with torch's "Sizes of tensors must match", or flattened a `(2, E, 1)` silently."""
    if edge_index.layout == torch.strided and (edge_index.dim() != 2 or edge_index.shape[0] != 2):  # not (N, N) sparse
        raise ValueError(f"expected edge_index of shape (2, E), got {tuple(edge_index.shape)}")


def _position_pair(pos) -> tuple:
    """`pos` given as a (sources, targets) pair; anything else (a NumPy array, a list of rows) is named as it
    came, not as the pair's first half."""
    if isinstance(pos, (tuple, list)) and len(pos) == 2:
        return tuple(pos)
    what = f"a {type(pos).__name__} of {len(pos)}" if isinstance(pos, (tuple, list)) else type(pos).__name__
    raise TypeError(f"expected pos a tensor or a (sources, targets) pair of tensors, got {what}")
