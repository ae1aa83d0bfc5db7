"""What more than one test module uses: one place, imported as tests.helpers.<module>; nothing here is
collected as a test."""
