"""Command-line tools: ``asyncsink records`` lists, shows and purges durable call records."""
