"""Data shipped with headscope: the demo text and demo checkpoints."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def demo_text() -> str:
    """The abstract of the t-SNE paper, the text the thesis analyses (Appendix A.4)."""
    return (DATA_DIR / "demo_text.txt").read_text().strip()
