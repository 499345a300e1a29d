"""Reports: findings from the numbers, one HTML page and its Markdown twin."""
