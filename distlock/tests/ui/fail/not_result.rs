use distlock::distributed_lock;

#[distributed_lock(key = "order:<user_id>")]
async fn place_order(user_id: u64) -> u64 {
    user_id
}

#[distributed_lock(key = "order:<user_id>")]
async fn option(user_id: u64) -> Option<u64> {
    Some(user_id)
}

fn main() {}
