package trunc

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBytes: at most n bytes, valid UTF-8 whatever was cut, and s itself
// when it fits.
func TestBytes(t *testing.T) {
	const n = 1024
	for _, s := range []string{"short", strings.Repeat("a", 2000), strings.Repeat("é", 700), strings.Repeat("a", 1023) + "éé"} {
		got := Bytes(s, n)
		if len(got) > n || !utf8.ValidString(got) || (len(s) <= n && got != s) {
			t.Errorf("Bytes(%d bytes) = %d bytes, valid UTF-8: %t", len(s), len(got), utf8.ValidString(got))
		}
	}
}
