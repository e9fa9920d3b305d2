"""Exchange rates: the operator's dated set of rates against USD, and order conversions."""
