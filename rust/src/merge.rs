//! merge kernel: see the module docs once implemented.
