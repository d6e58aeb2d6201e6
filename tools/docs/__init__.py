"""Parts of docs/ written from the code, so a page cannot drift from it: the rulebook table of docs/architecture.md."""
