"""One module per `nodeagent` subcommand: `add_arguments(parser)` and `run(args) -> int`."""
