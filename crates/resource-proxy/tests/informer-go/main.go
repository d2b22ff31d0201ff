// informer: a controller-runtime informer on the proxied Widgets of one namespace, for the
// resource proxy's e2e test of a target restart. It prints one JSON line per event its handler
// sees (after controller-runtime's ResourceVersionChangedPredicate rule: an update whose
// resourceVersion did not change is a resync, not an event) and "synced" once the cache synced.
//
//	informer KUBECONFIG NAMESPACE
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

var out sync.Mutex

func emit(kind string, obj interface{}) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
			u, _ = t.Obj.(*unstructured.Unstructured)
		}
	}
	line := map[string]string{"event": kind}
	if u != nil {
		line["name"] = u.GetName()
		line["rv"] = u.GetResourceVersion()
	}
	b, _ := json.Marshal(line)
	out.Lock()
	fmt.Println(string(b))
	out.Unlock()
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: informer KUBECONFIG NAMESPACE")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := crcache.New(cfg, crcache.Options{DefaultNamespaces: map[string]crcache.Config{os.Args[2]: {}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.test", Version: "v1", Kind: "Widget"})
	inf, err := c.GetInformer(ctx, w)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { emit("add", obj) },
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, n := oldObj.(*unstructured.Unstructured), newObj.(*unstructured.Unstructured)
			if o.GetResourceVersion() != n.GetResourceVersion() {
				emit("update", newObj)
			}
		},
		DeleteFunc: func(obj interface{}) { emit("delete", obj) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "cache did not sync")
		os.Exit(1)
	}
	out.Lock()
	fmt.Println(`{"event":"synced"}`)
	out.Unlock()
	<-ctx.Done()
}
