"""``tether bench``: benchmarks and their server launcher; the server never imports them."""
