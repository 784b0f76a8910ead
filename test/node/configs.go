package node

import "crypto/tls"

// cniConfig is the pod network: one bridge with host-local addresses from the
// node's pod CIDR, and portmap for hostPorts. No masquerading: nothing beyond
// the node's namespace is reachable anyway. host-local keeps its allocations
// under StateDir (cniDataDir), which Cleanup removes: in its default
// /var/lib/cni/networks, the addresses of the pods a stopped node still ran
// were never given back, and after some dozens of runs the /24 was full
// ("no IP addresses available in range set").
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "runner-guard-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "` + cniDataDir + `",
        "ranges": [[{"subnet": "` + PodCIDR + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// containerdConfig: root, state, socket, sandbox image, runc path, CNI bin
// dir, CNI conf dir. No CAP_SYS_RESOURCE on these machines, so a container's
// oom_score_adj may not go below containerd's own (restrict_oom_score_adj);
// cgroup v1 with the cgroupfs driver like the kubelet; pod network namespaces
// under the state directory so cleanup finds them.
const containerdConfig = `version = 3
root = "%s/containerd"
state = "%s/containerd"

[grpc]
  address = "%s"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "%s"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "%s"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["%s"]
    conf_dir = "%s"
    max_conf_num = 1
`

// kubeletConfig: client CA, serving cert and key, cgroup root, runtime
// endpoint, pod CIDR. cgroup v1 (hybrid) needs failCgroupV1: false and the
// cgroupfs driver; oomScoreAdj 0 because the kubelet may not lower its own
// score here. Eviction thresholds are low: the disk is shared with other
// builds and a full-looking disk must not evict the tests' pods. The API
// server is authenticated by its client certificate; any authenticated
// client is allowed (no webhook authorization to the API server needed).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
oomScoreAdj: 0
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "%s"}
authorization:
  mode: AlwaysAllow
tlsCertFile: "%s"
tlsPrivateKeyFile: "%s"
cgroupRoot: "%s"
containerRuntimeEndpoint: "%s"
podCIDR: "%s"
address: 0.0.0.0
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDomain: cluster.local
resolvConf: ""
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
  imagefs.inodesFree: "1%%"
shutdownGracePeriod: 0s
maxPods: 110
`

// kubeProxyConfig: kubeconfig, cluster CIDR, node name. iptables mode; the
// conntrack settings are left alone (0), since the machine's conntrack
// table is not the node's to size.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: "%s"
clusterCIDR: "%s"
hostnameOverride: "%s"
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  minSyncPeriod: 0s
  syncPeriod: 30s
`

// insecureLocalTLS is for the scheduler's health check only: it serves a
// self-signed certificate on 127.0.0.1 inside the node's namespace.
func insecureLocalTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback health check of a self-signed component
}
