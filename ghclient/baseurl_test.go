package ghclient

import "testing"

func TestSameBaseURL(t *testing.T) {
	tests := map[string]struct {
		a, b string
		want bool
	}{
		"identical":                {DefaultBaseURL, DefaultBaseURL, true},
		"trailing slash":           {"https://api.github.com", DefaultBaseURL, true},
		"host case":                {"https://API.GitHub.com/", DefaultBaseURL, true},
		"GHES path":                {"https://ghe.example.com/api/v3/", "https://ghe.example.com/api/v3", true},
		"other path":               {"https://ghe.example.com/api/v3/", "https://ghe.example.com/", false},
		"other host":               {"https://ghe.example.com/", DefaultBaseURL, false},
		"other scheme":             {"http://api.github.com/", DefaultBaseURL, false},
		"unparsable is never same": {"https://ghe.example.com/%zz", "https://ghe.example.com/%zz", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := SameBaseURL(tc.a, tc.b); got != tc.want {
				t.Errorf("SameBaseURL(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
