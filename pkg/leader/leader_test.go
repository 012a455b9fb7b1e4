package leader

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{LeaseName: "l", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"renew deadline too close to lease duration", func(c *Config) { c.RenewDeadline = 13 * time.Second }, "renew deadline"},
		{"renew deadline past lease duration", func(c *Config) { c.RenewDeadline = 20 * time.Second }, "renew deadline"},
		{"zero retry period", func(c *Config) { c.RetryPeriod = 0 }, "positive"},
		{"negative lease duration", func(c *Config) { c.LeaseDuration = -time.Second }, "positive"},
		{"no lease name", func(c *Config) { c.LeaseName = "" }, "lease name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestIdentityIsUnique(t *testing.T) {
	a, b := Identity(), Identity()
	if a == b || !strings.Contains(a, "_") {
		t.Errorf("identities %q and %q", a, b)
	}
}
