//! Starts etcd and real kube-apiservers on loopback for tests and the demo.
