"""Top-ups: an organization's requests to add money, credited or rejected by the operator."""
