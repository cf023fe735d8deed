import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.*;

/** HikariCP (Debian's libhikaricp-java) over pgJDBC, as a Java BI or web app pools dpsql: one
 *  connection borrowed and returned again and again, validated with isValid() (an empty query)
 *  or a connectionTestQuery, its state reset on return (run with -Dcom.zaxxer.hikari.aliveBypassWindowMs=0
 *  to validate at every borrow). args: url user password testQuery|"" */
public class HikariCheck {
    public static void main(String[] args) throws Exception {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(args[0]);
        config.setUsername(args[1]);
        config.setPassword(args[2]);
        if (!args[3].isEmpty()) config.setConnectionTestQuery(args[3]);
        config.setMaximumPoolSize(1);
        config.setMinimumIdle(1);
        config.setReadOnly(true);
        config.setAutoCommit(false);
        try (HikariDataSource pool = new HikariDataSource(config)) {
            for (int i = 0; i < 4; i++) {
                try (Connection c = pool.getConnection();
                     PreparedStatement ps = c.prepareStatement("SELECT COUNT(*) AS n FROM people WHERE age > ?")) {
                    ps.setInt(1, 20 + 10 * i);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("count " + rs.getLong("n"));
                    }
                    c.commit();
                }
                Thread.sleep(50);
            }
            try (Connection c = pool.getConnection(); Statement st = c.createStatement();
                 ResultSet rs = st.executeQuery("SHOW dpsql.budget")) {
                rs.next();
                System.out.println("queries " + rs.getLong("queries"));
                c.rollback();
            }
            System.out.println("connections " + pool.getHikariPoolMXBean().getTotalConnections());
        }
    }
}
