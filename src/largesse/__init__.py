"""Largesse: a self-hostable reward ordering service speaking the Tremendous API v2."""

__version__ = "0.1.0"
