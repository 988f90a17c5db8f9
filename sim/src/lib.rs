//! kaas-sim
