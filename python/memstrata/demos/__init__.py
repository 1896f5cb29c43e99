"""Scripted demos, one module per layer; each exposes ``run_demo(store, workdir)``."""
