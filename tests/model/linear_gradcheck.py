"""``gradcheck`` of a map that is linear in its inputs, cheaply and without losing a wrong Jacobian entry.

Full mode compares the whole Jacobian: 2 evaluations per input element and one backward per output element.
Fast mode compares ``v^T J u`` for random ``u, v`` alone, at a tolerance relative to ``|v^T J u|`` (1e-3 by default):
on a few hundred outputs a single entry off by 0.03 moves ``v^T J u`` by less than that and passes (20 draws of 20
on the 560 x 280 Jacobian of test_linear_gradcheck.py's map, which fails here). Central differences of a linear map
are exact to rounding, so here the tolerance is 1e-7 relative (1e-9 absolute): such an entry fails. A map
nonlinear in an input keeps full mode for it."""
from __future__ import annotations

LINEAR = {"fast_mode": True, "rtol": 1e-7, "atol": 1e-9}
