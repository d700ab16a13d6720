use distlock::distributed_lock;

#[distributed_lock(key = "a")]
struct Order;

trait Store {
    #[distributed_lock(key = "a")]
    async fn get(&self) -> Result<(), distlock::LockError>;
}

fn main() {}
