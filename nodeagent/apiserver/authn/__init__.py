"""Authenticators beyond the static token file and client certificates (auth.py): ServiceAccount JWTs."""
