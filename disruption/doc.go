// Package disruption is runner-guard's job-aware disruption controller. It
// runs in the webhook's binary beside the admission handler and shares its
// runner resolver and GitHub client:
//
//   - hints: while a runner pod's runner holds a job it keeps
//     karpenter.sh/do-not-disrupt "true" and
//     cluster-autoscaler.kubernetes.io/safe-to-evict "false" on the pod,
//     so the planners choose other nodes, and removes them (only those it
//     set) when the job ends;
//   - drains: on a cordoned node, or one tainted karpenter.sh/disrupted or
//     ToBeDeletedByClusterAutoscaler, it unregisters idle runners at once
//     and deletes their pods, and releases busy ones as soon as their job
//     ends, saying on the Node what the drain waits for;
//   - retiring: it deletes the EphemeralRunner of a runner the webhook
//     unregistered, outside the admission call.
//
// The hint and drain controllers are leader-elected; the Retirer runs on
// every replica. The admission webhook stays the gate: the hints only steer.
package disruption
