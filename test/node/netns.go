// Package node runs a real single-node Kubernetes cluster on this machine for
// runner-guard's node tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd, kubelet and kube-proxy, all inside a network
// namespace the harness creates, so pod and Service traffic never leaves
// namespaces of its own. Stop (or the next Start) removes every process,
// mount, cgroup and namespace it made.
package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Fixed names and addresses: a second run finds and removes what a first one
// left, and nothing here is visible outside the namespace.
const (
	NetnsName     = "runner-guard-node"
	NodeName      = "rg-node"
	NodeIP        = "10.200.0.2"
	nodeCIDR      = "10.200.0.2/24"
	PodCIDR       = "10.244.0.0/24"
	clusterCIDR   = "10.244.0.0/16"
	apiserverPort = 6443
	netnsDir      = "/run/netns"
)

// NetnsPath is the bind mount `ip netns` keeps for the node's namespace.
func NetnsPath() string { return filepath.Join(netnsDir, NetnsName) }

// createNetns makes the node's network namespace: loopback up, an eth0
// with the node's address and a default route through it (Service addresses
// need a route before kube-proxy's DNAT rewrites them), forwarding on, and
// bridged traffic through iptables for kube-proxy.
func createNetns(ctx context.Context) error {
	// Built into some kernels, so a failure is not fatal: the bridge sysctl
	// below says whether the module is there.
	_ = exec.CommandContext(ctx, "modprobe", "br_netfilter").Run()
	steps := [][]string{
		{"ip", "netns", "add", NetnsName},
		{"ip", "-n", NetnsName, "link", "set", "lo", "up"},
		// No dummy driver on these kernels: a veth pair with both ends in
		// the namespace gives eth0 a carrier.
		{"ip", "-n", NetnsName, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"},
		{"ip", "-n", NetnsName, "addr", "add", nodeCIDR, "dev", "eth0"},
		{"ip", "-n", NetnsName, "link", "set", "eth0", "up"},
		{"ip", "-n", NetnsName, "link", "set", "eth0-peer", "up"},
		{"ip", "-n", NetnsName, "route", "add", "default", "dev", "eth0"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	for key, val := range map[string]string{
		"net.ipv4.ip_forward":                 "1",
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
		"net.ipv4.conf.all.route_localnet":    "1",
	} {
		if err := InNetns(func() error { return writeSysctl(key, val) }); err != nil {
			return fmt.Errorf("sysctl %s=%s in the node's namespace: %w", key, val, err)
		}
	}
	return nil
}

func writeSysctl(key, val string) error {
	return os.WriteFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), []byte(val), 0o644)
}

// InNetns runs f on an OS thread that has joined the node's network
// namespace. Sockets f creates stay in that namespace wherever they are used
// later. If the thread cannot return to its own namespace it is left locked,
// so Go ends it instead of reusing it.
func InNetns(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer own.Close()
		target, err := os.Open(NetnsPath())
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open node netns: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials from inside the node's network namespace: the harness's
// own Kubernetes clients use it to reach the API server at the node address.
func DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// netnsInode identifies the node's namespace, to find the processes in it.
func netnsInode() (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(NetnsPath(), &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// inNetnsCommand wraps a command so it runs in the node's network namespace
// but in the host's mount namespace: `ip netns exec` would give it a private
// mount namespace, and containerd, runc and the kubelet must see each other's
// mounts.
func inNetnsCommand(ctx context.Context, bin string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + NetnsPath(), "--", bin}, args...)...)
}
