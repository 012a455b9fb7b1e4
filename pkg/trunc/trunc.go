// Package trunc cuts text that goes where a length is bounded (an Event's
// note, a ConversionReview's message, a log line) without splitting a
// character.
package trunc

import "unicode/utf8"

// Bytes cuts s to at most n bytes, at a character's start, marking the
// cut with "…".
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + "…"
}
