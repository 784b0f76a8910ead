package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where the node keeps state. Fixed paths, so Cleanup finds what an
// interrupted run left behind.
const (
	// StateDir holds containerd's content and snapshots and the kubelet's
	// pod directories.
	StateDir = "/var/lib/runner-guard-node"
	// RunDir holds sockets, containerd's state and pod network namespaces.
	RunDir = "/run/runner-guard-node"
	// cniDataDir holds host-local's address allocations (cniConfig).
	cniDataDir = StateDir + "/cni-networks"
	// legacyCNIDataDir is where runs before cniDataDir left their
	// allocations (host-local's default for the node's network name).
	legacyCNIDataDir = "/var/lib/cni/networks/runner-guard-node"
	// CgroupRoot is the kubelet's cgroupRoot: every pod cgroup is below it.
	CgroupRoot = "/runner-guard-node"
	cgroupFS   = "/sys/fs/cgroup"
)

// Cleanup removes everything a run of the node made, whether it ended well or
// not: processes in the node's namespace or cgroups, mounts under its
// directories, the directories, its cgroups and the namespace. It is safe to
// call when nothing is left; the errors it returns name what stayed.
func Cleanup(logf func(string, ...any)) error {
	var errs []error
	if n := killNodeProcesses(); n > 0 {
		logf("cleanup: killed %d leftover node processes", n)
	}
	if n, err := unmountUnder(StateDir, RunDir); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		logf("cleanup: unmounted %d mounts", n)
	}
	for _, d := range []string{StateDir, RunDir, legacyCNIDataDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(NetnsPath()); err == nil {
		if out, err := exec.Command("ip", "netns", "delete", NetnsName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %w: %s", NetnsName, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// killNodeProcesses SIGKILLs every process in the node's network namespace
// (the components and containerd's shims) or in a cgroup below CgroupRoot
// (the containers), and waits up to ten seconds for them to go. Processes of
// anyone else on the machine are in neither.
func killNodeProcesses() int {
	killed := 0
	for round := 0; round < 50; round++ {
		pids := nodePIDs()
		if len(pids) == 0 {
			return killed
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil && round == 0 {
				killed++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return killed
}

// nodePIDs lists the processes that belong to the node.
func nodePIDs() []int {
	self := os.Getpid()
	seen := map[int]bool{}
	if ino, ok := netnsInode(); ok {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(filepath.Join("/proc", e.Name(), "ns/net"), &st) == nil && st.Ino == ino {
				seen[pid] = true
			}
		}
	}
	for _, dir := range nodeCgroupDirs() {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || (d.Name() != "cgroup.procs" && d.Name() != "tasks") {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// nodeCgroupDirs is CgroupRoot in every mounted hierarchy (cgroup v1 has one
// per controller, plus the unified one).
func nodeCgroupDirs() []string {
	var dirs []string
	hier, _ := os.ReadDir(cgroupFS)
	for _, h := range hier {
		d := filepath.Join(cgroupFS, h.Name(), CgroupRoot)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if fi, err := os.Stat(filepath.Join(cgroupFS, CgroupRoot)); err == nil && fi.IsDir() {
		dirs = append(dirs, filepath.Join(cgroupFS, CgroupRoot))
	}
	return dirs
}

// createCgroupRoot makes CgroupRoot in every cgroup v1 hierarchy (and the
// unified one): the kubelet refuses a cgroupRoot that does not exist. A new
// cpuset cgroup starts with no CPUs or memory nodes, so those are copied
// from the hierarchy's root.
func createCgroupRoot() error {
	hier, err := os.ReadDir(cgroupFS)
	if err != nil {
		return fmt.Errorf("cgroup hierarchies: %w", err)
	}
	for _, h := range hier {
		top := filepath.Join(cgroupFS, h.Name())
		if _, err := os.Stat(filepath.Join(top, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		d := filepath.Join(top, CgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if h.Name() != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(top, f))
			if err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("write %s: %w", filepath.Join(d, f), err)
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups deepest first; a cgroup directory
// can only go once its processes and children have.
func removeCgroups() error {
	var errs []error
	for _, root := range nodeCgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := removeCgroupDir(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupDir retries for a few seconds: a killed process leaves its
// cgroup only once the kernel has reaped it.
func removeCgroupDir(d string) error {
	var err error
	for i := 0; i < 25; i++ {
		if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

// unmountUnder detaches every mount below the given directories, deepest
// first (pod volumes, container root filesystems, namespace bind mounts).
func unmountUnder(dirs ...string) (int, error) {
	mounts, err := mountPoints()
	if err != nil {
		return 0, err
	}
	var ours []string
	for _, m := range mounts {
		for _, d := range dirs {
			if m == d || strings.HasPrefix(m, d+"/") {
				ours = append(ours, m)
			}
		}
	}
	sort.Slice(ours, func(i, j int) bool { return len(ours[i]) > len(ours[j]) })
	var errs []error
	n := 0
	for _, m := range ours {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// mountPoints reads the mount points of the harness's mount namespace, which
// is the host's: the node's processes share it.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	return points, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
