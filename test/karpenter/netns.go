package karpenter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of this run's own, with only loopback in it.
// Karpenter, KWOK and kube-scheduler run in it: Karpenter binds its metrics
// and health ports on every interface and has no flag for it, and there
// every interface is this namespace's loopback.
//
// It is held by one OS thread that unshared it and never returns to the
// host's namespace; the namespace goes away when that thread ends (Close)
// and the last process in it exits, so nothing is left to clean up, not
// even after a crash. Sockets made on the thread stay in the namespace.
type netns struct {
	// path names the namespace for nsenter --net while it is open.
	path  string
	calls chan func()
	done  chan struct{}
}

// newNetns unshares a network namespace on a locked thread and brings its
// loopback up. It needs CAP_SYS_ADMIN (root).
func newNetns() (*netns, error) {
	n := &netns{calls: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(n.done)
		// Never unlocked: the thread ends with this goroutine instead of
		// going back to the pool in another namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare the network namespace: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			ready <- err
			return
		}
		n.path = fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		ready <- nil
		for f := range n.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return n, nil
}

// loopbackUp sets IFF_UP on lo in the calling thread's namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags of lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// do runs f on the namespace's thread.
func (n *netns) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case n.calls <- func() { errc <- f() }:
		return <-errc
	case <-n.done:
		return errors.New("network namespace closed")
	}
}

// listen opens a TCP listener inside the namespace.
func (n *netns) listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// dial connects from inside the namespace, e.g. to Karpenter's metrics.
func (n *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// close ends the holding thread. Processes still in the namespace keep it.
func (n *netns) close() {
	select {
	case <-n.done:
	default:
		close(n.calls)
		<-n.done
	}
}
