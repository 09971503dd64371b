"""Trainers of the drafters (DART, EAGLE-3) on a frozen target, writing the published checkpoint formats."""
