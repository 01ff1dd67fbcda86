"""Jinja templates of mi-certify: python/ (runtime), verilog/ (RTL)."""
