"""Network layer: the network verifier (CROWN bounds, LP relaxations and branch and bound, falsifier, Marabou, Z3), VNN-LIB, properties, campaigns."""
