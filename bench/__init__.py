"""``tether bench`` and ``tether cluster``, beside the server (installed as ``tether.bench``):
the benchmarks, their table (``commands``) and the launcher that runs ``tether serve`` as a
subprocess (tests use it too). The server never imports them."""
