//! Black-box cluster tests (built out in the chaos-suite issue).
