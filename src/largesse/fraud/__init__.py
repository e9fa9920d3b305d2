"""Fraud rules and reviews: rules an organization sets, evaluated when a recipient redeems (docs/fraud.md)."""
