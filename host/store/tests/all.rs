//! The tool store against real files and a real runtime.

mod suite;
