package topics

import (
	"context"
	"fmt"
	"strings"

	"github.com/aivedio/pipeline/shared/catalog"
)

// Grant is what one ACL user may do, in RocketMQ ACL 2.0's terms: actions
// ("Pub", "Sub") on resources ("Topic:<broker name>", "Group:<broker name>").
type Grant struct {
	Resources []string
	Actions   []string
}

// PublisherGrant is what `adapter relay` and `adapter replay` need:
// publishing to every topic of the catalog, and nothing else.
func PublisherGrant(topics []catalog.Topic) Grant {
	g := Grant{Actions: []string{"Pub"}}
	for _, t := range topics {
		g.Resources = append(g.Resources, "Topic:"+t.BrokerName())
	}
	return g
}

// ConsumerGrant is what `adapter source --group g` needs: subscribing to
// the group's topics, as the group. Receiving, acknowledging and changing a
// message's invisible time are all subscriber actions.
func ConsumerGrant(g catalog.Group) Grant {
	grant := Grant{Actions: []string{"Sub"}, Resources: []string{"Group:" + g.BrokerName()}}
	for _, s := range g.Subscriptions {
		grant.Resources = append(grant.Resources, "Topic:"+s.Topic.BrokerName())
	}
	return grant
}

// DrainGrant is what `adapter dlq drain --group g` needs: subscribing to
// g's dead-letter topic as the drain group.
func DrainGrant(g, drain catalog.Group) Grant {
	return Grant{Actions: []string{"Sub"}, Resources: []string{"Group:" + drain.BrokerName(), "Topic:" + g.DLQTopic()}}
}

// GrantUser makes a normal (not super) user with the password, or resets
// the password of an existing one, and allows it the grants. RocketMQ merges
// a grant into the user's existing ACL, so granting twice is harmless. The
// password travels on the admin tool's command line, as the tool requires.
func (a *Admin) GrantUser(ctx context.Context, user, password string, grants ...Grant) error {
	home, err := a.credentialsHome()
	if err != nil {
		return err
	}
	defer removeHome(home)
	create := Command{What: "user " + user, Args: []string{"createUser", "-n", a.Namesrv, "-c", a.Cluster, "-u", user, "-p", password, "-t", "Normal"}}
	if err := a.runOnce(ctx, home, create); err != nil {
		if !strings.Contains(err.Error(), "is existed") {
			return err
		}
		update := Command{What: "user " + user, Args: []string{"updateUser", "-n", a.Namesrv, "-c", a.Cluster, "-u", user, "-p", password}}
		if err := a.run(ctx, home, update); err != nil {
			return err
		}
	}
	for _, g := range grants {
		acl := Command{
			What: fmt.Sprintf("%s of user %s on %s", strings.Join(g.Actions, ","), user, strings.Join(g.Resources, ",")),
			Args: []string{"createAcl", "-n", a.Namesrv, "-c", a.Cluster, "-s", "User:" + user,
				"-r", strings.Join(g.Resources, ","), "-a", strings.Join(g.Actions, ","), "-d", "Allow"},
		}
		if err := a.run(ctx, home, acl); err != nil {
			return err
		}
	}
	return nil
}
