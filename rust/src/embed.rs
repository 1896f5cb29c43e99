//! embed kernel: see the module docs once implemented.
