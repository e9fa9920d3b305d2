"""Invoices: money an organization promises to pay; the operator marks them paid."""
