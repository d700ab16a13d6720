//! Methods: `&self`, `&mut self`, `self`, `<self.field>` and nested fields.
use distlock::{distributed_lock, LockError};

struct User {
    id: u64,
}

struct Request {
    user: User,
    pair: (u8, &'static str),
}

struct Account {
    id: u64,
    balance: i64,
}

impl Account {
    #[distributed_lock(key = "account:<self.id>")]
    async fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", wait = "1s")]
    pub async fn deposit(&mut self, amount: i64) -> Result<i64, LockError> {
        self.balance += amount;
        // Nested call on the same key in the same task: re-enters.
        self.balance().await
    }

    #[distributed_lock(key = "account:<self.id>")]
    async fn close(self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "transfer:<self.id>:<to>")]
    async fn transfer(self: &Self, to: u64) -> Result<u64, LockError> {
        Ok(self.id + to)
    }

    #[distributed_lock(key = "req:<req.user.id>:<req.pair.1>:<req.pair.0>")]
    async fn nested(req: &Request) -> Result<u64, LockError> {
        Ok(req.user.id)
    }
}

trait Store {
    async fn get(&self, key: &str) -> Result<String, LockError>;
}

struct Memory;

impl Store for Memory {
    #[distributed_lock(key = "store:<key>")]
    async fn get(&self, key: &str) -> Result<String, LockError> {
        Ok(key.to_uppercase())
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        distlock::init_from_str("[backends.m]\nmode = \"memory\"")
            .await
            .unwrap();
        let mut account = Account { id: 7, balance: 10 };
        assert_eq!(account.balance().await.unwrap(), 10);
        assert_eq!(account.deposit(5).await.unwrap(), 15);
        assert_eq!(account.transfer(1).await.unwrap(), 8);
        assert_eq!(account.close().await.unwrap(), 15);
        let req = Request {
            user: User { id: 42 },
            pair: (1, "x"),
        };
        assert_eq!(Account::nested(&req).await.unwrap(), 42);
        assert_eq!(Memory.get("k").await.unwrap(), "K");
    });
}
