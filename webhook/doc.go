// Package webhook is runner-guard's admission handler: it gathers the facts of
// DELETE pods and CREATE pods/eviction reviews, runs the decision table of
// docs/DESIGN.md over them and answers with an admission response, Events and
// metrics. It never talks HTTP to GitHub itself; that is ghclient's job.
package webhook
