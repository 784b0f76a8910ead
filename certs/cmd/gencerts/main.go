// Command gencerts writes a self-signed CA and a webhook serving certificate
// into a directory: tls.crt, tls.key and ca.crt (`make certs DIR=...`).
//
//	go run ./certs/cmd/gencerts -dir /tmp/k8s-webhook-server/serving-certs \
//	    -dns localhost -ip 127.0.0.1 -validity 720h
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/runner-guard/runner-guard/certs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gencerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dns, ips listFlag
	dir := fs.String("dir", "", "directory to write tls.crt, tls.key and ca.crt into (required)")
	fs.Var(&dns, "dns", "DNS SAN; repeat or separate with commas (default: the in-cluster Service names and localhost)")
	fs.Var(&ips, "ip", "IP SAN; repeat or separate with commas (default 127.0.0.1)")
	validity := fs.Duration("validity", certs.DefaultValidity, "lifetime of the serving certificate")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gencerts -dir DIR [-dns NAME]... [-ip ADDR]... [-validity DURATION]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gencerts: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *dir == "" {
		return fail("-dir is required")
	}
	if *validity <= 0 {
		return fail("-validity must be positive, got %v", *validity)
	}
	opts := certs.Options{DNSNames: dns, Validity: *validity}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return fail("-ip %q is not an IP address", s)
		}
		opts.IPs = append(opts.IPs, ip)
	}
	b, err := certs.Generate(opts)
	if err != nil {
		return fail("%v", err)
	}
	if err := b.WriteDir(*dir); err != nil {
		fmt.Fprintf(stderr, "gencerts: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s, %s and %s into %s (valid %s)\n", certs.CertFile, certs.KeyFile, certs.CACertFile, *dir, *validity)
	return 0
}
