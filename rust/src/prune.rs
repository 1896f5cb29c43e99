//! prune kernel: see the module docs once implemented.
