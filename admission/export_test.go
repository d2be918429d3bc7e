package admission

import "slices"

// NodeBreakers returns the cluster masters g keeps a breaker for, sorted,
// and those of them whose breaker is open.
func NodeBreakers(g *Gate) (addrs, open []string) {
	if g.nodes == nil {
		return nil, nil
	}
	g.nodes.mu.Lock()
	defer g.nodes.mu.Unlock()
	for addr, nb := range g.nodes.m {
		addrs = append(addrs, addr)
		if nb.isOpen() {
			open = append(open, addr)
		}
	}
	slices.Sort(addrs)
	slices.Sort(open)
	return addrs, open
}
