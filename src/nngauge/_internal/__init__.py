"""Probing any ``nn.Module``: data to batches, layer discovery, hooks, state restoration."""
