// Package archdoc has no code of its own: its test keeps the package
// picture of docs/architecture.md (the layers drawn and the table of
// imports) equal to the imports of the code, as `go list` reports them.
package archdoc
