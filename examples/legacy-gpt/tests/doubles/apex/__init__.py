"""Test double of NVIDIA apex: only the pieces legacy-gpt uses, in pure torch."""
