// Package events is runner-guard's GitHub webhook endpoint: POST
// /github/events receives signed workflow_job deliveries and writes the job
// an in_progress delivery names onto the pod of its runner (the signed
// runner-guard.io/job annotation, package jobannotation), and takes it off
// when the job's completed delivery arrives.
//
// Legacy runner pods carry no job of their own; the annotation gives them
// what ARC's EphemeralRunner job fields give scale-set pods: hints and a busy
// refusal with no GitHub request. A delivery may only keep a pod. Lost,
// late, repeated or reordered deliveries are a missed hint, never a wrong
// admission: only GitHub's DELETE proves a runner idle.
package events
