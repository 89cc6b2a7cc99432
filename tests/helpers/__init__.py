"""What the tests share: toy runs and data, NumPy references, margins,
processes, and the helper scripts that tests run as processes."""
