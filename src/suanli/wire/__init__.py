"""Wire schemas of the REST API (`/v1`): the one contract between the server, the SDK and the CLI.

pydantic v2 models named `*Request` (bodies the client sends) and `*Response` (what the server returns).
Money is integer micros; GPU shares are milli of one GPU; times are UTC ISO-8601.
"""
