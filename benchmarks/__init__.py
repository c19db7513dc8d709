"""Speed and quality benchmarks: scripts that time Podracer and a real peer in the same run and
print the ratio (run one with `python benchmarks/NAME.py --help`). A package only so that the
import contracts in pyproject.toml can place it above finance and locomotion."""
