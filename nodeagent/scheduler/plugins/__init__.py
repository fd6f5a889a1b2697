"""In-tree plugins, one subpackage each (NAME, Args, validate, new); discovered by the registry."""
