"""The op set: shapes rules, numpy reference kernels, and the frontend functions."""
