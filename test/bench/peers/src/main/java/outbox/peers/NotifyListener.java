package outbox.peers;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.util.concurrent.atomic.AtomicLong;

import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * A relay's wake-up by LISTEN/NOTIFY: listens on a channel and reads every notification, so the
 * notification queue is consumed as it would be by go-outbox, ulak or pgmq's listeners. Prints
 * {@code listening} once LISTEN committed, and {@code notifications=N} on SIGTERM or after
 * --timeout seconds (3600 by default).
 */
final class NotifyListener {
    private NotifyListener() {}

    static void run(Args a) throws Exception {
        String channel = a.get("channel");
        if (!channel.matches("[a-z_][a-z0-9_]*")) {
            throw new IllegalArgumentException("--channel: a lower-case identifier");
        }
        AtomicLong count = new AtomicLong();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("notifications=" + count.get())));
        try (Connection c = DriverManager.getConnection(a.get("jdbc"))) {
            c.setAutoCommit(true);
            try (Statement s = c.createStatement()) {
                s.execute("LISTEN " + channel);
            }
            System.out.println("listening");
            System.out.flush();
            PGConnection pg = c.unwrap(PGConnection.class);
            long deadline = System.currentTimeMillis() + (long) (a.getDouble("timeout", 3600) * 1000);
            while (System.currentTimeMillis() < deadline) {
                PGNotification[] n = pg.getNotifications(1000);
                if (n != null) {
                    count.addAndGet(n.length);
                }
            }
        }
    }
}
