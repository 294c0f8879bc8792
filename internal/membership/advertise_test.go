package membership

import "testing"

func TestResolveAdvertise(t *testing.T) {
	for _, tt := range []struct {
		in, ip string
		port   int
	}{
		{"10.0.0.7:7946", "10.0.0.7", 7946},
		{"localhost:7200", "127.0.0.1", 7200},
		{"[::1]:7300", "::1", 7300},
	} {
		ip, port, err := ResolveAdvertise(tt.in)
		if err != nil || ip != tt.ip || port != tt.port {
			t.Errorf("ResolveAdvertise(%q) = %q, %d, %v; want %q, %d", tt.in, ip, port, err, tt.ip, tt.port)
		}
	}
	for _, bad := range []string{"0.0.0.0:7946", "[::]:7946", "no-port", "10.0.0.7:0", ":7946"} {
		if ip, port, err := ResolveAdvertise(bad); err == nil {
			t.Errorf("ResolveAdvertise(%q) = %q, %d; want an error", bad, ip, port)
		}
	}
}
