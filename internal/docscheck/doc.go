// Package docscheck holds the test that keeps the user documentation's
// links true: every relative link and every #anchor in README.md,
// docs/*.md and examples/**/README.md must lead somewhere that exists.
// It has no code of its own; run it with go test ./internal/docscheck/.
package docscheck
