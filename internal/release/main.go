// Command release publishes the repository's modules as a user meets them,
// and checks what a user does with them.
//
// The modules a user imports are the ones the repository's go.work uses;
// they require each other at one version, V, with no replace directive.
// Every other module of the repository (demos, integration suites) has a
// go.work of its own that uses the library modules it needs.
//
//	go run . publish -out DIR   the library modules at V, as a GOPROXY=file:// tree
//	go run . check              publish into a temporary proxy, then, in fresh
//	                            modules outside the checkout, go get each module
//	                            from it and build every README snippet, on
//	                            go-micro v4 and on the newest go-micro v5
//	go run . tidy               go mod tidy -diff in every module, against that proxy
//	go run . tidy -write        go mod tidy in every module, against that proxy,
//	                            leaving no go.sum line of ours
//	go run . tags               the tag of each library module at V
//	go run . work               write the replaces of every go.work (below)
//	go run . version -set V2    write V2 wherever a module requires another,
//	                            and in every go.work
//	go run . api                the exported names and struct fields of every
//	                            package a user imports
//
// Run from anywhere inside the repository; -repo names its root otherwise.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	repoFlag := fs.String("repo", "", "the repository's root (default: found from the working directory up)")
	out := fs.String("out", "", "publish: the directory to write the proxy tree into")
	set := fs.String("set", "", "version: the version to require")
	keep := fs.Bool("keep", false, "check, tidy: keep the temporary directories, and print where they are")
	write := fs.Bool("write", false, "tidy: tidy every module rather than check it")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	repo, err := findRepo(*repoFlag)
	if err != nil {
		fail(err)
	}
	r, err := loadRepo(repo)
	if err != nil {
		fail(err)
	}
	switch cmd {
	case "publish":
		if *out == "" {
			fail(fmt.Errorf("publish: -out is required"))
		}
		err = r.publish(*out)
	case "check":
		if err = r.checkWorkFiles(); err == nil {
			err = withProxy(r, *keep, r.check)
		}
	case "tidy":
		if err = r.checkWorkFiles(); err == nil {
			tidy := r.tidy
			if *write {
				tidy = r.tidyWrite
			}
			err = withProxy(r, *keep, tidy)
		}
	case "tags":
		for _, m := range r.library {
			fmt.Println(r.tag(m))
		}
	case "work":
		err = r.writeWorkFiles(r.version)
	case "api":
		err = r.api()
	case "version":
		if *set == "" {
			fmt.Println(r.version)
			return
		}
		err = r.setVersion(*set)
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
}

// withProxy publishes the library modules into a temporary proxy tree and
// runs f with it, then removes every temporary file unless keep.
func withProxy(r *repo, keep bool, f func(w *work) error) error {
	tmp, err := os.MkdirTemp("", "regcache-release-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("== temporary files in", tmp)
	} else {
		defer removeAll(tmp)
	}
	w, err := newWork(r, tmp)
	if err != nil {
		return err
	}
	if err := r.publish(w.proxy); err != nil {
		return err
	}
	return f(w)
}

// removeAll removes dir, module cache included (whose files Go makes read
// only unless -modcacherw).
func removeAll(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release publish -out DIR | check | tidy | tags | work | version [-set V]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
