package egress

import (
	"errors"
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		addr    string
		special bool
	}{
		{"8.8.8.8", false},
		{"93.184.216.34", false},
		{"2606:4700::1111", false},
		{"127.0.0.1", true},
		{"127.255.1.2", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.1", false},
		{"192.168.1.1", true},
		{"169.254.169.254", true},
		{"100.64.0.1", true},
		{"100.100.100.200", true},
		{"100.128.0.1", false},
		{"0.0.0.0", true},
		{"224.0.0.1", true},
		{"255.255.255.255", true},
		{"198.18.0.1", true},
		{"::1", true},
		{"::", true},
		{"fe80::1", true},
		{"fd00:ec2::254", true},
		{"fc00::1", true},
		{"ff02::1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:8.8.8.8", false},
		{"64:ff9b::7f00:1", true},
		{"64:ff9b::808:808", false},
		{"2002:7f00:1::", true},
		{"2002:808:808::", false},
		{"::7f00:1", true},
		{"2001:db8::1", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got := Classify(netip.MustParseAddr(tt.addr))
			if (got != "") != tt.special {
				t.Fatalf("Classify(%s) = %q, want special=%v", tt.addr, got, tt.special)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	strict := &Policy{}
	open := &Policy{AllowPrivate: true, Ports: []uint16{8080}}
	tests := []struct {
		name    string
		p       *Policy
		network string
		address string
		ok      bool
	}{
		{"public 80", strict, "tcp", "8.8.8.8:80", true},
		{"public 443 v6", strict, "tcp6", "[2606:4700::1111]:443", true},
		{"public odd port", strict, "tcp", "8.8.8.8:8080", false},
		{"loopback", strict, "tcp", "127.0.0.1:80", false},
		{"metadata", strict, "tcp4", "169.254.169.254:80", false},
		{"mapped loopback", strict, "tcp6", "[::ffff:127.0.0.1]:80", false},
		{"udp", strict, "udp", "8.8.8.8:80", false},
		{"garbage", strict, "tcp", "nonsense", false},
		{"allowed loopback", open, "tcp", "127.0.0.1:8080", true},
		{"allowed loopback other port", open, "tcp", "127.0.0.1:9090", false},
		{"never unspecified", open, "tcp", "0.0.0.0:80", false},
		{"never multicast", open, "tcp", "224.0.0.1:80", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Control(tt.network, tt.address, nil)
			if (err == nil) != tt.ok {
				t.Fatalf("Control(%s) = %v, want ok=%v", tt.address, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrForbidden) {
				t.Fatalf("error %v does not wrap ErrForbidden", err)
			}
		})
	}
}

func TestAnyPort(t *testing.T) {
	p := &Policy{AllowPrivate: true, AnyPort: true}
	if err := p.Control("tcp", "127.0.0.1:31337", nil); err != nil {
		t.Fatal(err)
	}
}
