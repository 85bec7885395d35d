"""The `energon-arrow` command line (one module per subcommand)."""
